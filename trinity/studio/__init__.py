"""Trinity Studio: a config generator generated from the typed config schema.

``trinity studio --port 8080`` serves ``app.py`` with Streamlit. The form's keys, types,
defaults and help texts come from ``trinity.config.schema`` (``fields.py``); which keys
each mode shows is curated in ``layout.py``; ``generate.py`` turns form values into YAML
and checks it with the same ``load_config`` that ``trinity run`` uses.
"""
