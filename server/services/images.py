"""Images in chat requests: `image_url` parts decoded with Pillow under the server's limits, and the prompt they
make with the model's image encoder (its soft tokens spliced in at the template's markers, models/text/images.py).

Everything here runs on the preparation thread (server/preparation.py), before the model's queue. An image is
fetched only from a data: URL (base64 PNG, JPEG, WebP or GIF; the first frame of an animation), or from http(s)
where limits.allow_image_urls allows it. Limits (config/settings.py): limits.max_images per request (400),
limits.max_image_bytes per encoded image and limits.max_image_pixels per image (413, read from the header before
any pixel is decoded; Pillow's own decompression-bomb guard is set from the same limit). Data that is not an image,
is truncated or is in another format is a 400 naming the part.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import urllib.error
import urllib.request
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from config.settings import Limits
from models.text.images import ImageMarkers, expand_images, pixel_digest, soft_token_runs
from models.vision import ImageEncoder
from server.errors import InvalidRequest, RequestTooLarge
from server.protocols import TextTokenizer

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")  # what a client may send (Pillow's format names)
# the media type is only a label: Pillow reads the format from the data
_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)", re.DOTALL)
FETCH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ImagePart:
    """An image_url part of a request: its URL and where it sits (`param`, for errors)."""

    url: str
    param: str


@dataclass(frozen=True)
class PromptImage:
    """A preprocessed image of a prompt: its rows start at `start`; pixels as the encoder takes them."""

    start: int
    pixels: np.ndarray  # f32 [3, H, W]
    digest: str  # pixel_digest(pixels): the image's identity


def check_count(parts: list[ImagePart], limits: Limits) -> None:
    """400 past limits.max_images."""
    if len(parts) > limits.max_images:
        raise InvalidRequest(f"The request carries {len(parts)} images; this server takes at most "
                             f"{limits.max_images} per request.", param="messages", code="too_many_images")


def read_bytes(part: ImagePart, limits: Limits) -> bytes:
    """The encoded image of a part: a data: URL's base64, or (where allowed) an http(s) URL's body."""
    url = part.url.strip()
    if url.startswith("data:"):
        match = _DATA_URL.fullmatch(url)
        if match is None:
            raise InvalidRequest("The image is not a base64 data: URL (data:image/png;base64,...).", param=part.param,
                                 code="invalid_image_url")
        data = match["data"]
        if len(data) * 3 // 4 > limits.max_image_bytes + 3:
            raise _too_large(part, limits)
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as error:
            raise InvalidRequest(f"The image's base64 data does not decode: {error}.", param=part.param,
                                 code="invalid_image") from error
    elif url.startswith(("http://", "https://")):
        if not limits.allow_image_urls:
            raise InvalidRequest("This server takes images as base64 data: URLs only; fetching http(s) image URLs "
                                 "is off (limits.allow_image_urls).", param=part.param, code="image_url_not_allowed")
        raw = _fetch(url, part, limits)
    else:
        raise InvalidRequest("An image URL must be a data: URL (or http(s), where the server allows fetching).",
                             param=part.param, code="invalid_image_url")
    if len(raw) > limits.max_image_bytes:
        raise _too_large(part, limits)
    return raw


def _too_large(part: ImagePart, limits: Limits) -> RequestTooLarge:
    return RequestTooLarge(f"The image is larger than this server's limit of {limits.max_image_bytes} bytes.",
                           param=part.param, code="image_too_large")


def _fetch(url: str, part: ImagePart, limits: Limits) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # http(s) only: read_bytes checks
            raw = response.read(limits.max_image_bytes + 1)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise InvalidRequest(f"The image URL could not be fetched: {error}.", param=part.param,
                             code="invalid_image_url") from error
    return raw


def decode_image(raw: bytes, part: ImagePart, limits: Limits) -> Image.Image:
    """The image's pixels as RGB, its size checked against limits.max_image_pixels before they are decoded."""
    # Pillow's guard (an error past twice MAX_IMAGE_PIXELS) backs up the check below for formats whose frames may
    # grow past their header's size. The value is the same for every request, so threads may all set it.
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels
    try:
        image = Image.open(io.BytesIO(raw), formats=FORMATS)
        width, height = image.size
        if width * height > limits.max_image_pixels:
            raise RequestTooLarge(f"The image is {width} x {height} pixels; this server takes at most "
                                  f"{limits.max_image_pixels} pixels per image.", param=part.param,
                                  code="image_too_large")
        image.seek(0)
        image.load()
        return image.convert("RGB")
    except Image.DecompressionBombError as error:
        raise RequestTooLarge(f"The image is too large to decode: {error}", param=part.param,
                              code="image_too_large") from error
    except UnidentifiedImageError as error:
        raise InvalidRequest("The data is not a PNG, JPEG, WebP or GIF image.", param=part.param,
                             code="invalid_image") from error
    except (OSError, SyntaxError, ValueError, EOFError) as error:  # Pillow's errors for truncated or corrupt data
        raise InvalidRequest(f"The image could not be decoded ({error}).", param=part.param,
                             code="invalid_image") from error


def prepare(parts: list[ImagePart], encoder: ImageEncoder, limits: Limits) -> list[tuple[np.ndarray, str]]:
    """Each part's pixels as the encoder takes them, with their digest (limits checked first)."""
    check_count(parts, limits)
    prepared = []
    for part in parts:
        image = decode_image(read_bytes(part, limits), part, limits)
        pixels = np.asarray(encoder.preprocess(image), np.float32)
        prepared.append((pixels, pixel_digest(pixels)))
    return prepared


def prompt_with_images(text: str, images: list[tuple[np.ndarray, str]], markers: ImageMarkers,
                       encoder: ImageEncoder, tokenizer: TextTokenizer, add_bos: bool) -> tuple[list[int],
                                                                                                list[PromptImage]]:
    """A rendered prompt's ids with each image's soft tokens in place of its marker (the reference processor's
    expansion), and the images with the row each starts at."""
    try:
        counts = [encoder.soft_tokens(pixels) for pixels, _ in images]
    except ValueError as error:
        raise InvalidRequest(f"The images cannot be placed in the prompt: {error}.", param="messages") from error
    ids, (starts,) = expand_prompt(text, [(markers, counts)], tokenizer, add_bos)
    return ids, [PromptImage(s, pixels, digest) for s, (pixels, digest) in zip(starts, images, strict=True)]


def expand_prompt(text: str, inputs: list[tuple[ImageMarkers, list[int]]], tokenizer: TextTokenizer,
                  add_bos: bool) -> tuple[list[int], list[list[int]]]:
    """A rendered prompt's ids with each input's soft tokens in place of its placeholder, for each kind of input
    (images, audio clips: their markers and each one's soft-token count), and per kind the row each input starts
    at. 400 where the placeholders, or the tokenised runs, do not match the inputs."""
    try:
        for markers, counts in inputs:
            text = expand_images(text, markers, counts)
    except ValueError as error:
        raise InvalidRequest(f"The images or audio cannot be placed in the prompt: {error}.",
                             param="messages") from error
    ids = tokenizer.encode(text, add_bos=add_bos)
    starts = []
    for markers, counts in inputs:
        soft = tokenizer.encode(markers.soft, add_bos=False)
        if len(soft) != 1:
            raise InvalidRequest(f"The model's vocabulary has no {markers.soft} piece.", param="messages")
        try:
            starts.append(soft_token_runs(ids, soft[0], counts))
        except ValueError as error:
            raise InvalidRequest(f"The images or audio cannot be placed in the prompt: {error}.",
                                 param="messages") from error
    return ids, starts
