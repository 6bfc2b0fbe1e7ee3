"""What downstream applications use to read the clean topics: Faust records and a Faust codec.

The clean topics are the product's public output. A consumer should decode them with the same codecs the
worker encodes them with (``schemas.change_codec``), not with a second decoder that could drift from
them; this package puts those codecs behind the interfaces a Faust application expects.
"""
