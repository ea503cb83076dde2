"""The experiment files, shipped inside the package so that `--config NAME` finds them from any folder."""
