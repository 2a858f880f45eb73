-- A job that ended because its document needs an operator (an encrypted or damaged
-- file: job_fail with attention) is not a failed job. job_fail records that on the job
-- itself; `status`, its failures of the last hour and the metrics read the flag. Until
-- now they derived it by comparing the job's error text with the document's reason (and
-- mark-done's prefix), which an edited reason or a second attempt's text would break.
ALTER TABLE processing_jobs
    ADD COLUMN IF NOT EXISTS needs_attention boolean NOT NULL DEFAULT false;

-- Jobs that ended that way before this release, found as the old queries found them.
UPDATE processing_jobs j SET needs_attention = true
FROM documents d
WHERE d.id = j.document_id AND j.status = 'failed' AND NOT j.needs_attention
  AND d.attention_reason IN (
        left(j.error_message, 2000),
        'marked done without text by an operator: ' || left(j.error_message, 2000));
