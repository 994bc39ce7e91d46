"""Layer 3 -- what the user asked for: the run and stream settings resolved
from a TOML file and command-line flags (:mod:`.settings`)."""
