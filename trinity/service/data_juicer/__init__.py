"""Data-Juicer for the data pipelines: in this process, or as an HTTP service.

- ``runner.DataJuicerRunner``: a recipe's operators run here (needs ``py-data-juicer``);
- ``server``: the service, ``python -m trinity.service.data_juicer.server --port 5005``;
- ``client.DataJuicerService``: the service ``service.data_juicer`` names, started here
  (``auto_start``) or reached at ``server_url``; ``client.DataJuicerClient`` talks to it.
"""

from trinity.service.data_juicer.client import (
    DataJuicerClient,
    DataJuicerService,
    DataJuicerServiceError,
)
from trinity.service.data_juicer.runner import DataJuicerMissingError, DataJuicerRunner

__all__ = [
    "DataJuicerClient",
    "DataJuicerMissingError",
    "DataJuicerRunner",
    "DataJuicerService",
    "DataJuicerServiceError",
]
