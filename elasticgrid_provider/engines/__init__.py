"""Engines of the provider (iroh-tinker ``Engine`` subclasses); import nothing here."""
