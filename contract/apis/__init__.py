"""The serving APIs tailrace speaks, each with its traits declared once (registry.py)."""
from tailrace.contract.apis.registry import APIS, REGISTRY, ServingApi, listed, names_where, serving_api

__all__ = ["APIS", "REGISTRY", "ServingApi", "listed", "names_where", "serving_api"]
