"""E-invoices (EN 16931): XRechnung, ZUGFeRD/Factur-X, any UBL 2.1 or CII invoice.

``read`` turns the XML into an ``Invoice`` (model.py), ``validate`` checks it into a
``Report`` of findings (format and business-rule errors), ``embedded`` finds the XML
inside a hybrid PDF, ``render`` makes a readable PDF of an XML-only invoice. Every XML
parse goes through ingestd/xmlsafe.py. Nothing here writes to an original.
"""
