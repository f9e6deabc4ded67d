"""``python -m elasticgrid_provider``: the ``elasticgrid`` command."""

from elasticgrid_provider.cli import main

raise SystemExit(main())
