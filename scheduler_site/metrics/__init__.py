"""/metrics: the Prometheus exposition of the web (facts, worker and leader figures)."""
