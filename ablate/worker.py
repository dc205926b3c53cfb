"""`python -m ablate.worker RUN_DIR`: the entry point a launcher starts; ablate.train.worker trains the job."""

import sys

from ablate.train.worker import main

if __name__ == "__main__":
    sys.exit(main())
