"""`--mode=export`: the formats, the checks of a request, and the dispatch to the exporter
(`ctranslate2_export`, `stablehlo_export`), each imported only when asked for."""
# pylint: disable=import-outside-toplevel

from typing import Optional

from t2t_jax import key_table
from t2t_jax.export.common import (ExportError, ExportSource, check_output, check_translation,
                                   run_source)
from t2t_jax.inference import modes

FORMATS = ('ctranslate2', 'stablehlo', 'huggingface')


def check_request(export_format: Optional[str], output: Optional[str],
                  quantization: Optional[str]) -> None:
  """Refuses a bad `--mode=export` request before any checkpoint is read.

  Raises:
    ExportError: no or an unknown format, a quantization for a format without one, an
      unknown quantization, a missing optional package.
    FileExistsError: `output` exists.
  """
  if export_format not in FORMATS:
    raise ExportError(f'--mode=export needs --format={" or --format=".join(FORMATS)}'
                      + (f', got {export_format!r}' if export_format else ''))
  check_output(output)
  if export_format == 'ctranslate2':
    from t2t_jax.export import ctranslate2_export
    ctranslate2_export.check_quantization(quantization)
  elif export_format == 'huggingface':
    if quantization:
      raise ExportError(f'--quantization={quantization} applies to --format=ctranslate2 only; '
                        'the transformers directory keeps float32 parameters')
  else:
    if quantization:
      raise ExportError(f'--quantization={quantization} applies to --format=ctranslate2 only; '
                        'the StableHLO artifact keeps float32 parameters')
    from t2t_jax.export import stablehlo_export
    stablehlo_export.check_serialization()


def export(export_format: str, source: ExportSource, output: str,
           quantization: Optional[str] = None) -> str:
  """Writes `source` in `export_format` (`FORMATS`) into the new directory
  `output`; returns its absolute path. A parsing run's model is refused (`check_translation`)."""
  check_request(export_format, output, quantization)
  check_translation(source.config, f'the model ({source.description})')
  if export_format == 'ctranslate2':
    from t2t_jax.export import ctranslate2_export
    return ctranslate2_export.convert(source, output, quantization)
  if export_format == 'huggingface':
    from t2t_jax.export import huggingface_export
    return huggingface_export.convert(source, output)
  from t2t_jax.export import stablehlo_export
  return stablehlo_export.write_artifact(source, output)


def check_decoding_keys(overrides: modes.Overrides) -> None:
  """Refuses, in one line, a decoding key on the command line of an export
  (`key_table.EXPORT_REFUSED`: a CTranslate2 model is decoded with CTranslate2's own options,
  the StableHLO artifact with the paper's beam search)."""
  given = key_table.refused('export', overrides.keys)
  if given:
    raise ExportError(f'--config.{given}: an export does not decode, so it carries no '
                      'decoding options; give them when translating (CTranslate2: '
                      'num_hypotheses, sampling_topk/sampling_topp/sampling_temperature, '
                      'no_repeat_ngram_size, target_prefix; the StableHLO artifact decodes with '
                      'the paper\'s beam search)')


def run(workdir: str, overrides: modes.Overrides, checkpoint: Optional[str],
        export_format: Optional[str], output: Optional[str],
        quantization: Optional[str]) -> None:
  """`--mode=export`: checks the request, then exports the run's parameters (averaged, or
  `checkpoint`) and vocabulary into the new directory `output` and prints its path. A parsing
  run is refused before anything is written (`check_translation`)."""
  check_request(export_format, output, quantization)
  check_decoding_keys(overrides)
  config, inference = modes.load(workdir, checkpoint, overrides)
  check_translation(config, workdir)
  source = run_source(workdir, config, inference)  # its vocabularies, one or both sides'
  print(export(export_format, source, output, quantization))
