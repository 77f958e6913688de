"""Tests for t2t_jax.parsing.evalb: EVALB's scoring rules on small trees, scores derived by hand.

Notation in the derivations: a bracket is LABEL[start,end) over the words that EVALB keeps
(COLLINS.prm drops TOP, -NONE-, and the punctuation tags , : `` '' . with their words).
"""

import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from t2t_jax.parsing import evalb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
EVALB_C = os.path.join(ROOT, 'tests', 'fixtures', 'evalb', 'evalb.c')

DOG = '(TOP (S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .)))'


def score(gold, test, params=evalb.COLLINS):
  gold, test = ([gold], [test]) if isinstance(gold, str) else (gold, test)
  return evalb.score_lines(gold, test, params)


def only(result):
  (sentence,) = result.per_sentence
  return sentence


def test_identical_trees_punctuation_and_top_not_scored():
  # Kept words: The dog barked (the `.` goes with its tag). TOP is deleted, so the brackets
  # are S[0,3) NP[0,2) VP[2,3): 3 matched of 3 and 3. Length 4 (punctuation counts there).
  r = score(DOG, DOG)
  s = only(r)
  assert (s.length, s.status, s.matched, s.gold_brackets, s.test_brackets) == (4, evalb.OK, 3, 3, 3)
  assert (s.words, s.correct_tags, s.crossing) == (3, 3, 0)
  assert (r.recall, r.precision, r.f1, r.complete_match, r.tagging_accuracy) == (100, 100, 100,
                                                                                  100, 100)
  assert (r.sentences, r.error_sentences, r.skipped, r.valid_sentences) == (1, 0, 0, 1)


def test_punctuation_is_decided_by_each_trees_own_tags():
  # Test tags the final `.` as NN: it keeps 4 words against gold's 3 -> length mismatch,
  # an error sentence that scores nothing.
  r = score(DOG, DOG.replace('(. .)', '(NN .)'))
  assert only(r).status == evalb.ERROR
  assert r.errors == ['1 : Length unmatch (3|4)']
  assert (r.error_sentences, r.valid_sentences, r.total.gold_brackets) == (1, 0, 0)
  # Test tags `barked` as `,`: it loses that word -> 3 against 2.
  r = score(DOG, DOG.replace('(VBD barked)', '(, barked)'))
  assert r.errors == ['1 : Length unmatch (3|2)']
  # Another punctuation tag for `.` is deleted too: lengths agree, everything matches.
  assert score(DOG, DOG.replace('(. .)', '(: .)')).f1 == 100


def test_none_elements_and_the_nodes_they_leave_empty():
  # Gold keeps one word, `reported`. NP-SBJ, SBAR and the inner S dominate only -NONE-, so
  # they span [0,0) or [1,1) and are not scored: gold brackets S[0,1) VP[0,1) = 2, both
  # matched by the test. Length: reported and `.` = 2 (-NONE- does not count).
  gold = ('(S (NP-SBJ (-NONE- *)) (VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1)))) '
          '(. .))')
  s = only(score(gold, '(S (VP (VBD reported)) (. .))'))
  assert (s.length, s.words, s.matched, s.gold_brackets, s.test_brackets) == (2, 1, 2, 2, 2)


def test_function_tags_and_indices_are_cut():
  # NP-SBJ-1 -> NP and VP=2 -> VP: S, NP, VP all match.
  s = only(score('(S (NP-SBJ-1 (PRP he)) (VP=2 (VBD ran)))', '(S (NP (PRP he)) (VP (VBD ran)))'))
  assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 3)


def test_advp_equals_prt():
  gold = '(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))'
  # S[0,3) NP[0,1) VP[1,3) PRT[2,3): the test's ADVP[2,3) counts as PRT: 4 of 4.
  assert only(score(gold, gold.replace('PRT', 'ADVP'))).matched == 4
  # PP is no PRT: 3 of 4 both ways, F1 75.
  r = score(gold, gold.replace('PRT', 'PP'))
  assert (only(r).matched, r.recall, r.precision, r.f1) == (3, 75, 75, 75)


def test_duplicate_brackets_match_as_a_multiset():
  # Gold S[0,2) NP[0,1) NP[0,1) VP[1,2) = 4; test S NP VP = 3. The first gold NP takes the
  # test NP, the second finds none: 3 matched, recall 3/4, precision 3/3,
  # F1 2 * 75 * 100 / 175 = 85.714...
  gold = '(S (NP (NP (NN dog))) (VP (VBD ran)))'
  test = '(S (NP (NN dog)) (VP (VBD ran)))'
  r = score(gold, test)
  assert (only(r).matched, r.recall, r.precision) == (3, 75, 100)
  assert r.f1 == pytest.approx(600 / 7)
  assert r.complete_match == 0
  # The other way round: recall 100, precision 75.
  r = score(test, gold)
  assert (r.recall, r.precision) == (100, 75)


def test_unlabelled_root_is_a_scored_bracket():
  # `( (S ...))`: the root has the label '' (not TOP), so it is scored: gold ''[0,2) S NP VP
  # = 4 against the test's S NP VP (TOP deleted) = 3 -> recall 75, precision 100.
  tree = '(S (NP (NN dog)) (VP (VBD ran)))'
  r = score(f'( {tree})', f'(TOP {tree})')
  assert (only(r).gold_brackets, only(r).test_brackets, r.recall, r.precision) == (4, 3, 75, 100)
  # Both unlabelled: the root brackets match each other, 4 of 4.
  assert only(score(f'( {tree})', f'( {tree})')).matched == 4


def test_s1_root_is_scored_by_collins_and_deleted_by_new_prm():
  # COLLINS.prm does not list S1 (Charniak's root): S1[0,2) S NP VP = 4 against 3 -> 75.
  tree = '(S (NP (NN dog)) (VP (VBD ran)))'
  assert score(f'(S1 {tree})', f'(TOP {tree})').recall == 75
  assert score(f'(S1 {tree})', f'(TOP {tree})', evalb.NEW).recall == 100


def test_crossing_brackets():
  # Words: the dog saw it. Gold S[0,4) NP[0,2) VP[2,4) NP[3,4); test S[0,4) X[1,3) NP[3,4).
  # X[1,3) overlaps NP[0,2) (0 < 1 < 2 < 3) without nesting: 1 crossing. Matched S and
  # NP[3,4): recall 2/4 = 50, precision 2/3.
  gold = '(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (PRP it))))'
  test = '(S (DT the) (X (NN dog) (VBD saw)) (NP (PRP it)))'
  r = score(gold, test)
  assert (only(r).crossing, only(r).matched, r.recall) == (1, 2, 50)
  assert r.precision == pytest.approx(200 / 3)
  assert (r.average_crossing, r.total.no_crossing_percent,
          r.total.two_or_less_crossing_percent) == (1, 0, 100)


def test_word_mismatch_is_an_error_unless_eq_word():
  r = score('(S (NN dog))', '(S (NN cat))')
  assert r.errors == ['1 : Words unmatch (dog|cat)'] and r.error_sentences == 1
  params = dataclasses.replace(evalb.COLLINS, eq_words=(('cat', 'dog'),))
  r = score('(S (NN dog))', '(S (NN cat))', params)
  assert (r.error_sentences, r.recall) == (0, 100)


def test_test_tree_without_words_is_skipped():
  # A blank test line or one whose words are all deleted: skipped, not an error; the valid
  # sentence alone makes the totals.
  r = score([DOG, DOG, DOG], [DOG, '', '(TOP (. .))'])
  assert [s.status for s in r.per_sentence] == [evalb.OK, evalb.SKIPPED, evalb.SKIPPED]
  assert (r.sentences, r.skipped, r.valid_sentences, r.recall, r.complete_match) == (3, 2, 1, 100,
                                                                                     100)
  assert r.errors == []


def test_totals_are_corpus_level():
  # Sentence 1: 1 of 1 gold brackets; sentence 2: gold S[0,3) NP[0,2) VP[2,3) against a
  # flat S: 1 of 3. Corpus recall (1 + 1) / (1 + 3) = 50, not the mean 66.67 of 100 and
  # 33.33; precision (1 + 1) / (1 + 1) = 100.
  r = score(['(S (NN dog))', DOG], ['(S (NN dog))', '(S (DT The) (NN dog) (VBD barked))'])
  assert (r.recall, r.precision, r.complete_match) == (50, 100, 50)


def test_f1_without_any_match():
  # Gold S[0,2) NP[0,1) against X[0,2): nothing matches, P = R = 0. EVALB computes 0/0 and
  # prints -nan; the attribute is 0.0.
  r = score('(S (NP (NN a)) (NN b))', '(X (NN a) (NN b))')
  assert (r.recall, r.precision, r.f1) == (0, 0, 0)
  assert 'Bracketing FMeasure       =   -nan\n' in r.summary()


def test_max_error_gives_up_at_max_error_plus_two():
  # evalb.c exits when its error count, before adding the new one, exceeds MAX_ERROR: with
  # MAX_ERROR 1, two error sentences are reported and the third ends the run.
  params = dataclasses.replace(evalb.COLLINS, max_error=1)
  bad = '(S (NN cat))'
  r = score(['(S (NN dog))'] * 2, [bad] * 2, params)
  assert r.error_sentences == 2
  with pytest.raises(evalb.EvalbError, match=r'test, tree 3: Words unmatch \(dog\|cat\), error '
                     r'sentence 3: EVALB gives up at MAX_ERROR\+2 = 3'):
    score(['(S (NN dog))'] * 3, [bad] * 3, params)
  unlimited = dataclasses.replace(evalb.COLLINS, max_error=None)
  assert score(['(S (NN dog))'] * 30, [bad] * 30, unlimited).error_sentences == 30


def test_cutoff_length_counts_punctuation_but_not_none():
  # With CUTOFF_LEN 3: DOG has length 4 (The dog barked .) -> only in `total`; the second
  # tree has 3 words and a -NONE- -> length 3, in both sections.
  params = dataclasses.replace(evalb.COLLINS, cutoff_len=3)
  short = '(S (NP (-NONE- *)) (NN a) (NN b) (NN c))'
  r = score([DOG, short], [DOG, short], params)
  assert [s.length for s in r.per_sentence] == [4, 3]
  assert (r.total.sentences, r.short.sentences, r.short.gold_brackets) == (2, 1, 1)
  assert 'len<=3' in r.summary()


def test_quote_repair_of_new_prm():
  # Gold tags `"` as `` (deleted), the test as CD (kept): COLLINS.prm sees 2 against 3 words.
  # new.prm's QUOTE_LABEL repair puts the gold `"` back at word 1 (one kept word before it);
  # S and NP, open around it, grow to [0,3). Then S and NP match (2 of 2) and 2 of the 3
  # tags agree (DT, NN; `` is not CD).
  gold = '(S (NP (DT a) (`` ") (NN house)))'
  test = '(S (NP (DT a) (CD ") (NN house)))'
  assert score(gold, test).errors == ['1 : Length unmatch (2|3)']
  s = only(score(gold, test, evalb.NEW))
  assert (s.status, s.words, s.matched, s.gold_brackets, s.correct_tags) == (evalb.OK, 3, 2, 2, 2)


def test_matching_is_greedy_in_reading_order():
  # NP = QP and QP = NX, but NP != NX. Gold opens QP[0,1) then NP[0,1); test NP[0,1) then
  # NX[0,1). Gold QP takes the first test bracket that fits, NP; gold NP then finds only
  # NX: 1 match (a best matching would find 2, EVALB does not look for it).
  params = dataclasses.replace(evalb.COLLINS, eq_labels=(('NP', 'QP'), ('QP', 'NX')))
  assert only(score('(QP (NP (NN x)))', '(NP (NX (NN x)))', params)).matched == 1


def test_unlabelled_scoring_and_eq_label_on_tags():
  # Gold S[0,2) NP[0,1) VP[1,2); the test swaps NP and VP: labelled 1 of 3, unlabelled 3.
  gold, test = '(S (NP (NN dog)) (VP (VBD ran)))', '(S (VP (NN dog)) (NP (VBD ran)))'
  assert only(score(gold, test)).matched == 1
  assert only(score(gold, test, dataclasses.replace(evalb.COLLINS, labeled=False))).matched == 3
  # Tags compare with EQ_LABEL too: NNS for NN is correct under EQ_LABEL NN NNS.
  params = dataclasses.replace(evalb.COLLINS, eq_labels=(('NN', 'NNS'),))
  assert only(score(gold, gold.replace('NN ', 'NNS '), params)).correct_tags == 2
  assert only(score(gold, gold.replace('NN ', 'NNS '))).correct_tags == 1


def _write(path, lines):
  path.write_text(''.join(line + '\n' for line in lines))
  return str(path)


def test_python_m_prints_the_summary_without_a_runpy_warning(tmp_path):
  gold = tmp_path / 'gold.trees'
  gold.write_text(DOG + '\n')
  proc = subprocess.run([sys.executable, '-m', 't2t_jax.parsing.evalb', '--gold', str(gold), '--test',
                         str(gold)], cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0
  assert proc.stderr == ''  # no runpy RuntimeWarning about t2t_jax.parsing.evalb run a second time
  assert proc.stdout == evalb.score_lines([DOG], [DOG]).report(per_sentence=False)


def test_command_line_summary_table_and_errors(tmp_path, capsys):
  gold = _write(tmp_path / 'gold.txt', ['(S (NP (NP (NN dog))) (VP (VBD ran)))', DOG])
  test = _write(tmp_path / 'test.txt', ['(S (NP (NN dog)) (VP (VBD ran)))', '(S (NN x))'])
  evalb.main(['--gold', gold, '--test', test])
  out, err = capsys.readouterr()
  # Sentence 2 is a length error (3|1); sentence 1 alone: recall 75, precision 100,
  # F1 85.71 (see test_duplicate_brackets_match_as_a_multiset).
  assert out.startswith('=== Summary ===\n\n-- All --\nNumber of sentence        =      2\n'
                        'Number of Error sentence  =      1\n')
  assert 'Bracketing FMeasure       =  85.71\n' in out and 'Sent.' not in out
  assert err == '2 : Length unmatch (3|1)\n'
  prm = _write(tmp_path / 'p.prm', ['LABELED 1', 'CUTOFF_LEN 2'])
  evalb.main(['--gold', gold, '--test', test, '--per-sentence', '--param', prm,
              '--cutoff-len', '3'])
  out, _ = capsys.readouterr()
  # No DELETE_LABEL: the `.` is a word, so sentence 2 is 4|1 and sentence 1 has length 2.
  assert out.startswith('  Sent.                        Matched  Bracket   Cross        Correct '
                        'Tag\n')
  assert '   1    2    0   75.00 100.00     3      4    3      0      2     2   100.00\n' in out
  assert '\n-- len<=3 --\n' in out


def test_command_line_bad_input_is_one_line(tmp_path):
  gold = _write(tmp_path / 'gold.txt', ['(S (NN dog)'])
  with pytest.raises(SystemExit, match=r"^error: .*gold.txt, tree 1: unbalanced brackets: 1 '\(' "
                     r'not closed$'):
    evalb.main(['--gold', gold, '--test', gold])
  with pytest.raises(SystemExit, match=r'^error: no such file: .*nothing.txt$'):
    evalb.main(['--gold', gold, '--test', str(tmp_path / 'nothing.txt')])


@pytest.mark.skipif(shutil.which('cc') is None, reason='needs a C compiler for evalb.c')
def test_same_output_as_c_evalb():
  # 40 random corpora of 20 tree pairs under COLLINS.prm, new.prm and two other settings:
  # the whole standard output and the error lines of the C program, or where it gives up.
  from benchmarks.studies import evalb_differential
  result = evalb_differential.differential(EVALB_C, runs=40, trees=20, seed=0)
  assert result['first_mismatches'] == [] and result['mismatches'] == 0
  assert result['evalb_gave_up'] >= 1
