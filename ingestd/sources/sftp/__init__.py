"""The SFTP server for scanners: listener (server.py), connections (session_host.py), login
(auth.py), chrooted inbox (vfs.py, inbox.py, uploads.py), durable spool (spool.py, its
parts spool_*.py) and its intake loop (spool_intake.py), accounts, bans, host keys and
algorithms."""
