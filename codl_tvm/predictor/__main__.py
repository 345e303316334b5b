import sys

from codl_tvm.predictor.cli import main

sys.exit(main())
