-- 0004: room on each documents page for HOT updates.
--
-- A document's processing_status changes two or three times within seconds (queued ->
-- processing -> done), and analyze-document sets its title and date. None of those
-- columns is indexed, so with free space on the page Postgres updates the row in place
-- (HOT) instead of adding an entry to every index of documents: with a million documents
-- those inserts land on random pages of the (tenant_id, sha256) index, a cost that grew
-- with the archive. Applies to pages written from now on.
ALTER TABLE documents SET (fillfactor = 85);
