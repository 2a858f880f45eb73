"""Scanner auto-names, vendor by vendor: every family's default name is a placeholder
(ingestd/filenames/scanner_names.py), and names a person typed stay titles."""

from __future__ import annotations

from datetime import date

import pytest

from ingestd.filenames.scanner_names import VENDOR_PATTERNS
from ingestd.filenames.titles import MAX_TITLE_LENGTH, parse_filename

TODAY = date(2026, 12, 4)

# (vendor, file name as the device writes it); where the scheme comes from is noted in
# scanner_names.py beside its pattern.
AUTO_NAMES = [
    # Konica Minolta bizhub: mode letter + device name + YYMMDDhhmm + serial + page.
    ("Konica Minolta", "SKMBT_C36418120315150.pdf"),
    ("Konica Minolta", "CKMBT_C45108102315230_0001.jpg"),
    ("Konica Minolta", "SKMBT_50108102315230.tif"),
    ("Konica Minolta", "SKM_C25826110314150.pdf"),
    ("Konica Minolta", "SKM_C360i26120314150_0001.pdf"),
    ("Konica Minolta", "KM_C360i-20261203141522.pdf"),
    # HP: HP Scan's "myscan", the MFP's scan to folder, the scan app's counters.
    ("HP", "myscan.pdf"),
    ("HP", "myscan_0001.pdf"),
    ("HP", "MyScan 2.pdf"),
    ("HP", "scan0001.pdf"),
    ("HP", "HPSCAN_20261203141522.pdf"),
    ("HP", "HPSCAN_20261203141522_001.jpg"),
    # Canon: cameras and CanoScan, imageRUNNER with an empty name field.
    ("Canon", "IMG_0001.pdf"),
    ("Canon", "SCAN0001.PDF"),
    ("Canon", "_20261203_141522.pdf"),
    ("Canon", "20261203141522.pdf"),
    # Ricoh: date, time and milliseconds.
    ("Ricoh", "20261203141522123.pdf"),
    ("Ricoh", "20261203141522123_0001.tif"),
    # Sharp: the device name before date and time; mode_MMDDYYYY_hhmmssAM.
    ("Sharp", "SHARP_MX-2640N_20261203_141522.pdf"),
    ("Sharp", "SHARP MX-M453N_20261203_141522.pdf"),
    ("Sharp", "SCAN_12032026_021522PM.pdf"),
    ("Sharp", "Scan_20261203_141522.pdf"),
    # Kyocera: "doc" + job number (+ date and time) + page.
    ("Kyocera", "doc00012320261203141522.pdf"),
    ("Kyocera", "doc0001_000.tif"),
    # Xerox.
    ("Xerox", "Xerox Scan_12032026141522.pdf"),
    ("Xerox", "img-1203141522-0001.pdf"),
    ("Xerox", "DOC031226-03122026141522.pdf"),
    # Brother: BRN/BRW + MAC, the apps' Scan_.
    ("Brother", "BRN3C2AF4123456_000123.pdf"),
    ("Brother", "BRW0080927AFBCE.pdf"),
    ("Brother", "Scan_20261203_141522.pdf"),
    # Epson.
    ("Epson", "img20261203_14152201.pdf"),
    ("Epson", "EPSON001.PDF"),
    # Fujitsu ScanSnap: date and time, as digits or with separators.
    ("Fujitsu ScanSnap", "20261203141522.pdf"),
    ("Fujitsu ScanSnap", "2026_12_03_14_15_22.pdf"),
    # Panasonic KV: prefix + DOCnn-type-sequence.
    ("Panasonic", "Panasonic_DOC01-M-00001.jpg"),
    ("Panasonic", "20261203141522_DOC01-M-00001.pdf"),
    ("Panasonic", "KV-S1037X_DOC01-C-000001.pdf"),
    # Lexmark.
    ("Lexmark", "Scanned Document.pdf"),
    ("Lexmark", "image2026-12-03-141522.pdf"),
    # Toshiba e-STUDIO.
    ("Toshiba", "DOC20261203141522.pdf"),
    ("Toshiba", "DOC20261203141522-001.pdf"),
    ("Toshiba", "20261203141522.pdf"),
    # Samsung.
    ("Samsung", "Scan_0001.pdf"),
    ("Samsung", "Image_20261203.pdf"),
    ("Samsung", "Image_0001 (2).pdf"),
]

# Names a person typed: the device's word or the vendor's name in them does not make
# them auto-names.
TYPED_NAMES = [
    "Rechnung Müller 2026.pdf",
    "Scan of contract Meier.pdf",
    "HP invoice March.pdf",
    "Scan Rechnung Telekom.pdf",
    "Scanner Wartungsvertrag.pdf",
    "Doc Brown Brief.pdf",
    "Dokumentation Heizung.pdf",
    "Imagebroschüre 2026.pdf",
    "Image Kampagne Herbst.pdf",
    "KM Abrechnung 2026.pdf",
    "Kilometergeld 2026.pdf",
    "Sharp Aquos Garantie.pdf",
    "Sharp MX-2640N Handbuch.pdf",
    "Panasonic Garantie.pdf",
    "Samsung Kaufvertrag 2026-11-03.pdf",
    "EPSON Garantie 2026.pdf",
    "Brother Druckerrechnung.pdf",
    "Xerox Wartung 12-2026.pdf",
    "Lexmark Angebot.pdf",
    "Toshiba Leasing Vertrag.pdf",
    "Canon Rechnung.pdf",
    "Ricoh Servicebericht.pdf",
    "Kyocera Toner Bestellung.pdf",
    "Fujitsu ScanSnap Anleitung.pdf",
]

VENDORS = {
    "Konica Minolta",
    "HP",
    "Canon",
    "Ricoh",
    "Sharp",
    "Kyocera",
    "Xerox",
    "Brother",
    "Epson",
    "Fujitsu ScanSnap",
    "Panasonic",
    "Lexmark",
    "Toshiba",
    "Samsung",
}


@pytest.mark.parametrize(("vendor", "name"), AUTO_NAMES, ids=[f"{v}:{n}" for v, n in AUTO_NAMES])
def test_vendor_auto_names_are_placeholders(vendor: str, name: str) -> None:
    """A device's default name is a placeholder, titled by its cleaned stem for now."""
    info = parse_filename(name, today=TODAY)
    assert info.placeholder is True, f"{vendor}: {name} taken as a title a person chose"
    assert info.title


@pytest.mark.parametrize("name", TYPED_NAMES)
def test_names_a_person_typed_stay_titles(name: str) -> None:
    """A name with words a person chose is a title, even beside a vendor's name or word."""
    assert parse_filename(name, today=TODAY).placeholder is False


def test_every_vendor_has_examples() -> None:
    """The table covers each vendor family the issue names, and each vendor pattern."""
    covered = {vendor for vendor, _ in AUTO_NAMES}
    assert covered == VENDORS
    assert {vendor for vendor, _ in VENDOR_PATTERNS} <= covered


def test_auto_name_dates_are_taken_where_unambiguous() -> None:
    """An auto-name's ISO-ordered timestamp is its issued date; MMDDYYYY is not guessed."""
    assert parse_filename("KM_C360i-20261203141522.pdf", today=TODAY).issued == date(2026, 12, 3)
    assert parse_filename("HPSCAN_20261203141522.pdf", today=TODAY).issued == date(2026, 12, 3)
    assert parse_filename("SCAN_12032026_021522PM.pdf", today=TODAY).issued is None


@pytest.mark.timeout(5)
@pytest.mark.parametrize(
    "name",
    [
        "SKM_C" + "1" * 10000 + "x",
        "KM_C1" + "_1" * 5000 + "x",
        "SHARP_MX-1" + "_1" * 5000 + "x",
        "x" * 10000 + "DOC01-M-0000x",
        "scan" + " 1pm" * 3000 + " Rechnung",
    ],
    ids=["km-digits", "km-groups", "sharp-groups", "panasonic-prefix", "am-pm"],
)
def test_vendor_patterns_parse_long_near_misses_quickly(name: str) -> None:
    """Long names that almost match a vendor scheme do not make the regex backtrack."""
    assert len(parse_filename(name, today=TODAY).title) <= MAX_TITLE_LENGTH
