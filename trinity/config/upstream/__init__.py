"""Upstream Trinity-RFT's and veRL's config layouts, spellings and interpolations, translated
into the native schema and settings."""
