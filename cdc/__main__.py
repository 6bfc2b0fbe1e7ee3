import sys

from cdc.cli import main

sys.exit(main())
