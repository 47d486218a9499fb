import sys

from perfdiff.cli import main

sys.exit(main())
