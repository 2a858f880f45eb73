-- 0022 sessions that can end (issue 31): the console's sessions are signed cookies, so a
-- copy of one would be good until it expires. A session is honoured only if it began after
-- the person's last sign-out (`sessions_from`, set at logout) and after their password was
-- last set (a new password ends every earlier session, on every device).
ALTER TABLE people ADD COLUMN IF NOT EXISTS sessions_from TIMESTAMPTZ;
