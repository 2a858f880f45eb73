-- Operator events: the outbox of notifications (ingestd/events, worker/jobs).
-- Named queries: each starts with "-- name: <name>"; psycopg's %(param)s placeholders.

-- name: operator_event_insert
-- Events decided outside a transaction (the daemon: a quarantined file, an SFTP ban) carry
-- their own event_id, so one buffered on disk while Postgres was down is inserted once.
INSERT INTO operator_events (event_id, type, severity, tenant, detail, trace_id, created_at)
VALUES (%(event_id)s::uuid, %(type)s, %(severity)s, %(tenant)s, %(detail)s, %(trace_id)s,
        %(created_at)s)
ON CONFLICT (event_id) DO NOTHING;

-- name: operator_event
SELECT event_id, type, severity, tenant, detail, trace_id, created_at
FROM operator_events WHERE event_id = %(event_id)s::uuid;

-- name: operator_events_to_relay
-- New events, oldest first; SKIP LOCKED: workers relaying at once take different rows.
SELECT id, event_id, type, severity, tenant, detail, trace_id, created_at
FROM operator_events WHERE relayed_at IS NULL
ORDER BY id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: operator_events_relayed
UPDATE operator_events SET relayed_at = now() WHERE id = ANY(%(ids)s::bigint[]);

-- name: system_tenant
SELECT id FROM tenants WHERE name = '_system';
