"""Triggers: asynchronous waiting on jobs, so a deferred task holds no worker slot."""
