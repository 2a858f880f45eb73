"""What a file's name tells before its content is read: a title, a date, whether it is a
scanner's automatic name (and of which vendor). A leaf: config validates its patterns
with it, intake names documents with it, analysis asks it again."""
