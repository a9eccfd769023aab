"""Static checks: the code scan, registry and run-config checks (``spanspec check``), what a group
expression enables (``spanspec groups``) and the generated reference (``spanspec docs``).

Nothing here runs in a training process: these modules read files (source, YAML) and nothing else.
"""
