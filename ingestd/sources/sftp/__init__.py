"""The SFTP server for scanners: transport and limits (server.py), chrooted inbox (vfs.py),
durable spool and its intake loop (spool.py), accounts, bans, host keys and algorithms."""
