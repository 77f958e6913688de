"""Export a trained run for serving: CTranslate2 and StableHLO exporters, what they share
(`common`) and the dispatcher on top of them (`formats`)."""
