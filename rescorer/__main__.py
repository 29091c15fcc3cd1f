"""``python -m rescorer``: the same as the ``rescorer`` console command."""

from rescorer.cli import main

if __name__ == "__main__":
    main()
