"""`trinity run`: stages, Ray actors, resume, progress and summary."""
