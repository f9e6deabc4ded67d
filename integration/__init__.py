"""The integration suite: the provider on a real Airflow deployment (make integration)."""
