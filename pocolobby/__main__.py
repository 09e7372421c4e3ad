from __future__ import annotations

from pocolobby.cli import main

raise SystemExit(main())
