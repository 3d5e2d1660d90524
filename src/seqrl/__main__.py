import sys

from seqrl.cli import main

sys.exit(main())
