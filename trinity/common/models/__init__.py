"""Import path named by the user docs for model utilities (``trinity.common.models.utils``)."""
