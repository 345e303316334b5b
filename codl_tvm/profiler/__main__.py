import sys

from codl_tvm.profiler.cli import main

sys.exit(main())
