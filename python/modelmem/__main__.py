"""`python -m modelmem ARGS` and the `modelmem` console entry point: the modelmem command-line
tool shipped in the package (modelmem/bin/modelmem), run with the same arguments. It is the
C++ tool itself (exec'd, so exit status, signals and output are its own); `modelmem run` finds
the LD_PRELOAD library beside it, in modelmem/lib."""

import os
import sys


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    tool = os.path.join(here, "bin", "modelmem")
    args = sys.argv[1:] if argv is None else list(argv)
    if not os.access(tool, os.X_OK):
        sys.stderr.write(f"modelmem: the command-line tool {tool} is missing from this package "
                         f"(reinstall modelmem)\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(tool, ["modelmem", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
