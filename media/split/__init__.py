"""Split-and-stitch transcodes (issue 33): the media layer.

One title is cut into exact frame ranges (`plan`), each range is encoded on its own, once for all
renditions or once per rendition (`encode`), the audio is encoded once for the whole source
(`audio`), and the chunks of a rendition are joined without re-encoding (`stitch`). Quality is
measured per chunk and pooled from per-frame scores (`pooling`); with a VMAF target, each chunk
searches its own CRF (`target`).

Pure functions, argv builders and small runners: no database, no models. The stages that schedule
them live in workers/stages/.
"""
