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
# Hand-typed stand-ins seen in example stack files: none is ciphertext in either format.
PLACEHOLDER_WORDS = ("changeme", "change-me", "placeholder", "replace", "todo", "xxx", "secret", "example",
                     "ciphertext", "dummy", "fake")


def _decodes(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def is_ciphertext(value: object) -> bool:
    """True for a value of one of Pulumi's ciphertext formats that is no known placeholder."""
    if not isinstance(value, str) or any(w in value.lower() for w in PLACEHOLDER_WORDS):
        return False
    symmetric = SYMMETRIC.fullmatch(value)
    if symmetric:
        return len(base64.b64decode(symmetric.group(1))) == 12 and _decodes(symmetric.group(2))
    return bool(BASE64.fullmatch(value)) and len(value) % 4 == 0 and _decodes(value)
