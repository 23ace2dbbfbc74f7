"""Services the run starts or talks to over HTTP, outside its Ray actors.

- ``data_juicer``: runs Data-Juicer recipes on rows for the data pipelines
  (``service.data_juicer``).
"""
