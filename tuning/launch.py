"""`python -m tuning.launch`: the image's entrypoint and LAYOUT=host's
launcher (a foreign image runs tuning/container/launch.py itself, bound alone). The module is
tuning/container/launch.py; importing this name gives that module itself, so the two can never
differ.
"""

import runpy
import sys

if __name__ == "__main__":
    runpy.run_module("tuning.container.launch", run_name="__main__", alter_sys=True)
else:
    from tuning.container import launch

    sys.modules[__name__] = launch
