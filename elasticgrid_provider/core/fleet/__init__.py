"""Many jobs on one grid: the ledger of held capacity and the rules for sharing it."""
