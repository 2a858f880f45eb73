"""Full-text search in one tenant's documents, bounded: what a query may hold (limits),
how its words are counted (tsquery) and the search itself under a statement timeout
(query)."""
