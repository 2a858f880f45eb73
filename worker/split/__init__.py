"""split-batch (issue 16): read a batch's pages cheaply, plan its children, write them.

- ``marks``: what a page says (its barcodes, its ink) — the one hand-off between reading
  pages and planning;
- ``scan``: reads every page of a PDF or TIFF batch, one page in memory at a time;
- ``plan``: from the marks and the policy, the children (page ranges, ASN, tags) or the
  reason the batch needs an operator;
- ``children``: writes each child as a PDF from the batch's own page objects.
"""
