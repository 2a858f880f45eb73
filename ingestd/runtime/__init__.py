"""Process plumbing every long-running part reports to: metrics, health beats, systemd
notifications, signal flags, the state directory, log floods, fault injection for the
crash tests. Below the domain: it imports nothing of ingestd but the leaves."""
