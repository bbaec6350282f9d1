"""Reading what the project does not control: files named on the command line or in a stack,
YAML documents, URLs and text that came from elsewhere.

Every module here turns hostile input into one `InputError` line (naming the file or URL and
the fix) instead of a hang, a memory blow-up, a traceback or a silently changed value:
- `files.read_regular_file`: regular files only, a size cap checked by `stat` before reading;
- `safe_yaml.load`: no anchors or aliases, YAML 1.2 scalars, no duplicate keys, standard tags only;
- `untrusted`: URLs with credentials redacted, text made safe for a terminal and for rich markup.

It imports nothing of the project, so every layer (sizing's model configs and lengths files,
settings' stack files, the twin's profiles, the load-test report) reads its files through it.
"""
from .errors import InputError  # noqa: F401
