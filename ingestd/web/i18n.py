"""German and English, chosen by the browser's Accept-Language: one table of the console's
texts. A key missing in German falls back to English; a text missing in both is the key."""

from __future__ import annotations

import re

LANGUAGES = ("en", "de")

TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "title": "ingestd archive",
        "login": "Log in",
        "logout": "Log out",
        "login_name": "Login",
        "password": "Password",
        "login_failed": "Login or password is wrong.",
        "login_throttled": "Too many failed logins. Try again later.",
        "tenants": "Your archives",
        "search": "Search",
        "query": "Words, a phrase in quotes, -word to exclude",
        "since": "Arrived from",
        "until": "to",
        "source": "Source",
        "name": "File name",
        "no_hits": "No documents match.",
        "document": "Document",
        "title_col": "Title",
        "date_col": "Date",
        "arrived": "Arrived",
        "file": "Original file",
        "size": "Size",
        "status": "Status",
        "tags": "Tags",
        "correspondent": "Correspondent",
        "doc_type": "Type",
        "download_original": "Download the original",
        "download_searchable": "Download the searchable PDF",
        "history": "History",
        "not_found": "Not found.",
        "forbidden": "Your role in this archive does not allow that.",
        "bad_request": "The request could not be understood.",
        "role": "Your role",
        "bytes": "bytes",
        "parts": "parts",
        "part_of": "Part of",
        "back": "Back to the search",
        "upload": "Add documents",
        "upload_button": "Upload",
        "uploaded": "Uploaded",
        "edit": "Edit",
        "save": "Save",
        "attention": "Needs attention",
        "requeue": "Analyse again",
        "mark_done": "Accept without text",
        "reason": "Reason",
        "too_large": "The file is too large.",
        "outcome_ingested": "archived",
        "outcome_duplicate": "already in the archive",
        "outcome_refused": "refused",
        "nothing_attention": "No document needs attention.",
        "arrivals": "Arrivals",
        "preview": "Page 1",
        "pages": "Pages",
        "page": "Page",
        "more_pages": "{n} more page(s): download the PDF to see them.",
        "pages_of_original": "Not analysed (yet): the first page of the original.",
        "too_many": "Too many requests. Please wait a moment.",
        "members": "People",
        "remove": "remove",
        "admin": "Appliance",
        "database": "Database",
        "tenant": "Archive",
        "documents": "Documents",
        "jobs": "Jobs",
        "pools": "Worker pools",
        "spool": "SFTP spool",
        "bans": "Banned addresses",
        "account": "Your account",
        "back_members": "Back to the people",
        "home": "Back to your archives",
        "add_member": "Add a person",
        "add": "Add",
        "add_member_hint": (
            "A new person cannot log in until they set a password: give them the link the "
            "button next to their name makes."
        ),
        "first_password_link": "Link to set a password",
        "first_password_link_hint": (
            "Give this link to the person (it is shown only now): it lets them set their "
            "password once."
        ),
        "days": "days",
        "set_password": "Set your password",
        "welcome_hint": "Choose the password you will log in with as",
        "first_password_set": "Your password is set: log in with it.",
        "change_password": "Change your password",
        "change_password_hint": (
            "Your other sessions (other browsers, other devices) end with the change."
        ),
        "current_password": "Current password",
        "new_password": "New password (at least 8 characters)",
        "new_password_again": "New password again",
        "password_changed": "Your password is changed; your other sessions have ended.",
        "directory_password": (
            "You log in with your directory (Active Directory/LDAP) password: change it there."
        ),
    },
    "de": {
        "title": "ingestd Archiv",
        "login": "Anmelden",
        "logout": "Abmelden",
        "login_name": "Anmeldename",
        "password": "Passwort",
        "login_failed": "Anmeldename oder Passwort ist falsch.",
        "login_throttled": "Zu viele fehlgeschlagene Anmeldungen. Bitte später erneut versuchen.",
        "tenants": "Ihre Archive",
        "search": "Suchen",
        "query": "Wörter, eine Phrase in Anführungszeichen, -Wort schließt aus",
        "since": "Eingegangen ab",
        "until": "bis",
        "source": "Quelle",
        "name": "Dateiname",
        "no_hits": "Keine Dokumente gefunden.",
        "document": "Dokument",
        "title_col": "Titel",
        "date_col": "Datum",
        "arrived": "Eingegangen",
        "file": "Originaldatei",
        "size": "Größe",
        "status": "Status",
        "tags": "Schlagworte",
        "correspondent": "Korrespondent",
        "doc_type": "Dokumenttyp",
        "download_original": "Original herunterladen",
        "download_searchable": "Durchsuchbares PDF herunterladen",
        "history": "Verlauf",
        "not_found": "Nicht gefunden.",
        "forbidden": "Ihre Rolle in diesem Archiv erlaubt das nicht.",
        "bad_request": "Die Anfrage ist ungültig.",
        "role": "Ihre Rolle",
        "bytes": "Bytes",
        "parts": "Teile",
        "part_of": "Teil von",
        "back": "Zurück zur Suche",
        "upload": "Dokumente hinzufügen",
        "upload_button": "Hochladen",
        "uploaded": "Hochgeladen",
        "edit": "Bearbeiten",
        "save": "Speichern",
        "attention": "Klärungsbedarf",
        "requeue": "Erneut analysieren",
        "mark_done": "Ohne Text übernehmen",
        "reason": "Grund",
        "too_large": "Die Datei ist zu groß.",
        "outcome_ingested": "archiviert",
        "outcome_duplicate": "bereits im Archiv",
        "outcome_refused": "abgelehnt",
        "nothing_attention": "Kein Dokument braucht Klärung.",
        "arrivals": "Eingänge",
        "preview": "Seite 1",
        "pages": "Seiten",
        "page": "Seite",
        "more_pages": "{n} weitere Seite(n): das PDF herunterladen, um sie zu sehen.",
        "pages_of_original": "(Noch) nicht analysiert: die erste Seite des Originals.",
        "too_many": "Zu viele Anfragen. Bitte einen Moment warten.",
        "members": "Personen",
        "remove": "entfernen",
        "admin": "Appliance",
        "database": "Datenbank",
        "tenant": "Archiv",
        "documents": "Dokumente",
        "jobs": "Aufträge",
        "pools": "Worker-Pools",
        "spool": "SFTP-Spool",
        "bans": "Gesperrte Adressen",
        "account": "Ihr Konto",
        "back_members": "Zurück zu den Personen",
        "home": "Zurück zu Ihren Archiven",
        "add_member": "Person hinzufügen",
        "add": "Hinzufügen",
        "add_member_hint": (
            "Eine neue Person kann sich erst anmelden, wenn sie ein Passwort gesetzt hat: "
            "geben Sie ihr den Link, den die Schaltfläche neben ihrem Namen erzeugt."
        ),
        "first_password_link": "Link zum Setzen des Passworts",
        "first_password_link_hint": (
            "Geben Sie diesen Link der Person (er wird nur jetzt angezeigt): Mit ihm setzt "
            "sie einmal ihr Passwort."
        ),
        "days": "Tage",
        "set_password": "Passwort festlegen",
        "welcome_hint": "Wählen Sie das Passwort, mit dem Sie sich anmelden als",
        "first_password_set": "Ihr Passwort ist gesetzt: Melden Sie sich damit an.",
        "change_password": "Passwort ändern",
        "change_password_hint": (
            "Ihre anderen Sitzungen (andere Browser, andere Geräte) enden mit der Änderung."
        ),
        "current_password": "Aktuelles Passwort",
        "new_password": "Neues Passwort (mindestens 8 Zeichen)",
        "new_password_again": "Neues Passwort wiederholen",
        "password_changed": "Ihr Passwort ist geändert; Ihre anderen Sitzungen sind beendet.",
        "directory_password": (
            "Sie melden sich mit dem Passwort Ihres Verzeichnisses (Active Directory/LDAP) "
            "an: Ändern Sie es dort."
        ),
    },
}

_RANGE = re.compile(
    r"^\s*([A-Za-z]{1,8})(?:-[A-Za-z0-9]{1,8})*\s*(?:;\s*q\s*=\s*([01](?:\.\d{0,3})?))?\s*$"
)


def language(accept_language: str | None) -> str:
    """The language to answer in: the browser's most preferred one we have, else English.
    A header we cannot read is English too (it is input from outside)."""
    best, best_q = "en", -1.0
    for position, part in enumerate((accept_language or "")[:500].split(",")[:20]):
        m = _RANGE.match(part)
        if not m:
            continue
        lang = m.group(1).lower()
        q = float(m.group(2)) if m.group(2) else 1.0
        if lang in LANGUAGES and (q > best_q) and q > 0:
            best, best_q = lang, q - position * 1e-6  # the first listed wins a tie
    return best


def text(lang: str, key: str) -> str:
    """The text ``key`` in ``lang``."""
    return TEXTS.get(lang, {}).get(key) or TEXTS["en"].get(key) or key
