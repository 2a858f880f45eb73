-- 0007 what analyze-document itself wrote into documents, so a forced re-analysis can
-- replace its own title and date (derived data, invariant 4) and never a person's.
-- placeholder_title: the scanner auto-name the document had before analysis (NULL when the
-- name was meaningful: analysis never owned that title); derived_title / derived_issued_date:
-- what analysis set, NULL when it set nothing. documents.title equal to one of them means
-- nobody changed it since; anything else (a person, a workflow template) is kept.
ALTER TABLE document_content ADD COLUMN IF NOT EXISTS placeholder_title TEXT;
ALTER TABLE document_content ADD COLUMN IF NOT EXISTS derived_title TEXT;
ALTER TABLE document_content ADD COLUMN IF NOT EXISTS derived_issued_date DATE;
