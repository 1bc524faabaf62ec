from harness.gpucheck.cli import main

raise SystemExit(main())
