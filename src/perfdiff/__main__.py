from perfdiff.cli import main
from perfdiff.parallel import exit_now

exit_now(main())
