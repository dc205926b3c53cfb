"""`python -m ablate.worker RUN_DIR`: the entry point a launcher starts; ablate.train.worker trains the job."""

from ablate.train.worker import exit_at_once, main

if __name__ == "__main__":
    exit_at_once(main())
