"""Hot folders: watch directories, decide when a dropped file is complete, hand it over.

``watcher`` (the ``HotFolders`` a daemon runs) composes: ``observers`` (one watchdog
observer per folder, re-armed when a folder is deleted, recreated or remounted),
``pending`` (noticing files, the stability decision), ``table`` (where each file is and
when it is due, under one lock), ``stuck`` (committed files that cannot leave), with
``folders`` (a folder's root and names) and ``writers`` (the kernel's writer check).
``backlog`` is ``ingestd status``'s view of the folders from disk.
"""

from ingestd.sources.hotfolders.backlog import backlog_on_disk
from ingestd.sources.hotfolders.watcher import HotFolders

__all__ = ["HotFolders", "backlog_on_disk"]
