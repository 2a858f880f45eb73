"""The names scanners, multifunction devices and scanning apps give a scan nobody named.

``titles.py`` takes a file name that one of these patterns matches whole (case-insensitive,
NFC) as a *placeholder*: the document gets it as a title for now, and a title read from
its text later. The schemes come from the vendors' manuals where one says (noted below);
the examples are in tests/unit/test_scanner_names.py, one table row per vendor scheme,
beside names a person typed that must stay titles ("Scan of contract Meier").

Every pattern here is linear on hostile names: a run of digits is never split two ways
(no ``(\\d+)*``), so a 10,000-character near-miss cannot make the regex backtrack.
"""

from __future__ import annotations

# Words of an app/device name may be joined by space, underscore or hyphen depending on
# the device and on whatever the upload client did to spaces.
WORD_SEP = r"[ _-]*"

# Names that devices and apps put in front of a counter or a timestamp, or use alone.
AUTO_NAME_PREFIXES = (
    "scan",  # Canon/HP/Brother/Samsung/Lexmark: SCAN0001, Scan_20261203_141522; Sharp's
    # "SCAN_12032026_021522PM" (its manual's Quick File names: mode_MMDDYYYY_hhmmssAM)
    "scanned document",  # iOS Files / Notes; Lexmark scan to network
    "scanned image",
    "gescanntes dokument",  # iOS in German
    "xerox scan",  # Xerox: Xerox Scan_12032026141522
    "myscan",  # HP Scan (Windows) default name: myscan, myscan_0001
    "hpscan",  # HP MFP scan to folder: HPSCAN_20261203141522
    "adobe scan",
    "camscanner",
    "genius scan",
    "office lens",
    "microsoft lens",
    "img",  # Canon/phones: IMG_0001; Epson Scan: img20261203_14152201; Xerox: img-…
    "image",  # Samsung: Image_20261203; Lexmark: image2026-12-03-141522
    "dsc[nf]?",  # cameras: DSC01234, DSCN0001, DSCF0001
    "pxl",  # Google Pixel: PXL_20261203_141522123
    "epson",  # EPSON001
    # Kyocera "<name><job nnnn>_<page mmm>" with the factory name "doc" (doc0001_000,
    # doc00012320261203141522); Toshiba e-STUDIO DOC20261203141522; Xerox DOC031126-…
    "doc",
    "document",
    "dokument",
    "new document",
    "neues dokument",
    "untitled",
    "untitled document",
    "unbenannt",
    "screenshot",
    "bildschirmfoto",
    "whatsapp image",
)

# Device names that lead a timestamp: the name is the device's, not the document's.
VENDOR_PATTERNS: tuple[tuple[str, str], ...] = (
    # Brother: BRN/BRW + the device's 12-hex-digit MAC + optional page counter.
    ("Brother", r"br[nw][0-9a-f]{12}(?:_\d+)?"),
    # Konica Minolta bizhub (Box Operations manual, "Naming documents"): mode letter
    # (C copy, S scan/fax, F fax, P print) + device name ("KMBT_C451"; newer "KM_C258",
    # "KM_C360i") + YYMMDDhhmm + serial digit + "_0001" page: SKMBT_C36418120315150,
    # CKMBT_C45108102315230_0001, SKM_C25826110314150, KM_C360i-20261203141522.
    ("Konica Minolta", r"[cfps]?(?:kmbt|km)_[a-z]?\d+(?:[a-z]{1,2}\d*)?(?:[ _-]+\d+)*"),
    # Sharp MX/BP/AR/DX: the device name (factory "SHARP MX-2640N") before the date and
    # time: SHARP_MX-2640N_20261203_141522. The model has its hyphen and a digit, so
    # "Sharp Aquos" stays a title.
    ("Sharp", r"sharp[ _-]+[a-z]{2}-[a-z]?\d[0-9a-z]*(?:[ _-]+\d+(?:[ap]m)?)+"),
    # Panasonic KV scanners (manual, "Output File"): prefix (host name, date and time,
    # a field the admin set) + "DOC01" + "-" + type code + "-" + 5-6 digit sequence:
    # Panasonic_DOC01-M-00001, 20261203141522_DOC01-M-00001.
    ("Panasonic", r".*doc\d\d-[a-z]-\d{5,6}"),
)
