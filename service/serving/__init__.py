"""Serving deployments under load: `POST /v1/estimate/serving`."""
