"""The SFTP server for scanners: transport and limits (server.py), chrooted inbox (vfs.py),
durable spool (spool.py, its parts spool_*.py) and its intake loop (spool_intake.py),
accounts, bans, host keys and algorithms."""
