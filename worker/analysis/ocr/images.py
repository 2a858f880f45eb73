"""Images become a PDF for ocrmypdf: one page per frame, losslessly (JPEG data passed
through, other images flattened to 8-bit gray or RGB PNG only when img2pdf refuses them)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageSequence

from worker.analysis.ocr.errors import OcrInputError

# ocrmypdf's own rule: a claimed resolution at or below 96 dpi is a program's default,
# not a scanner's; such images (and those without any) get OcrOptions.image_dpi.
CREDIBLE_DPI = 96.0


def image_to_pdf(src: Path, dest: Path, image_dpi: int) -> Path:
    """One PDF page per image frame, the image data passed through where PDF allows."""
    import img2pdf  # type: ignore[import-untyped]  # here: 70 ms a PDF-only child skips

    try:
        with Image.open(src) as im:
            dpi = im.info.get("dpi")
            frames = getattr(im, "n_frames", 1)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None
    credible = isinstance(dpi, tuple) and bool(dpi) and min(map(float, dpi)) > CREDIBLE_DPI
    layout = (
        img2pdf.default_layout_fun
        if credible
        else img2pdf.get_fixed_dpi_layout_fun((image_dpi, image_dpi))
    )
    kwargs = {"layout_fun": layout, "rotation": img2pdf.Rotation.ifvalid}
    if frames < 1:
        raise OcrInputError("the image has no frames")
    try:
        data = img2pdf.convert(str(src), **kwargs)
    except img2pdf.ImageOpenError as exc:
        raise OcrInputError(f"the image cannot be read: {exc}") from None
    except Exception:  # alpha channels, 16 bits, odd colour spaces: flatten, then again
        try:
            data = img2pdf.convert(_flattened_frames(src, dest.parent), **kwargs)
        except OcrInputError:
            raise
        except Exception as exc:
            raise OcrInputError(f"the image cannot be converted to PDF: {exc}") from None
    with open(dest, "wb") as f:
        f.write(data)
    return dest


def _flattened_frames(src: Path, work: Path) -> list[str]:
    """Each frame as a lossless 8-bit gray or RGB PNG on white (what PDF images can be)."""
    paths = []
    try:
        with Image.open(src) as im:
            for i, frame in enumerate(ImageSequence.Iterator(im)):
                rgba = frame.convert("RGBA")
                flat = Image.new("RGB", rgba.size, (255, 255, 255))
                flat.paste(rgba, mask=rgba.getchannel("A"))
                if frame.mode in ("1", "L", "LA", "I", "I;16", "F"):
                    flat = flat.convert("L")
                path = work / f"frame-{i:05d}.png"
                flat.save(path, "PNG", dpi=frame.info.get("dpi", im.info.get("dpi", (0, 0))))
                paths.append(str(path))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise OcrInputError(f"the image cannot be decoded: {exc}") from None
    return paths
