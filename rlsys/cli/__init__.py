"""Every console script: rlsys-train, rlsys-eval, rlsys-report, rlsys-data, rlsys-models, rlsys-digiq and
rlsys-propose-tasks. Each module parses its arguments and turns failures into exit codes; the work is done below."""
