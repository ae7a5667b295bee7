-- Reserved for the catch-up migration (issue 20), built on another branch: migrations are
-- numbered without gaps, and the overlap policies' is 010. Merging that branch replaces this
-- file with its 009 (delete this one then).
SELECT 1;
