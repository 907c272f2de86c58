# Each slow test's time on the 2-core machine (seconds, the clean clone's CI of 2026-12-07 at -j4), as ctest's COST:
# with -j, ctest starts the costliest first, so a clean clone (no Testing/Temporary/CTestCostData.txt
# yet) does not leave a two-minute test for the end. Refresh from build/ctest-junit.xml when tests
# change much; tests not listed cost 0 (started after these).
set(_dtune_test_costs
  # The two tests that take the whole machine (cluster.bandwidth RUN_SERIAL, mpi.pipeline_bubble all
  # 4 slots) first, while nothing else has started: last, each ran alone after the others' tail
  # (60 s and 83 s at the end of the CI run of 2026-12-07).
  cluster.bandwidth 1001
  mpi.pipeline_bubble 1000
  cluster.nodes 40
  smoke.sweeps.tune 311
  mpi.shard 227
  mpi.pipeline 180
  smoke.new_user 173
  mpi.train 172
  mpi.llama 163
  smoke.doc_pages 129
  smoke.sweeps 105
  bundle.gpu_rehearsal 96
  mpi.mesh 92
  faults.sweeps 92
  data.loader 92
  faults.tune_inputs 85
  smoke.compare 84
  smoke.sweeps.tune_real 84
  mpi.pipeline_mixed 77
  smoke.model_cli 76
  faults.report_hostile 75
  faults.report_inputs 71
  slurm.nodes 66
  faults.binary_limits 63
  smoke.train_results 61
  mpi.comm 54
  unit.sweeps.halving 53
  unit.sweeps.carried 53
  slurm.tune 51
  smoke.llama 47
  faults.sweep_inputs 46
  smoke.report 44
  faults.secrets 44
  smoke.probe 43
  faults.model_inputs 42
  smoke.report_verdicts 41
  faults.train 40
  data.s3_storage 37
  data.damaged_inputs 30
  faults.data 29
  unit.sweeps.hosts 27
  slurm.sweeps 27
  smoke.report_advice 26
  faults.comm 25
  smoke.model_parity 25
  smoke.train_profile 23
  mpi.gpt_tp 23
  smoke.report_sharding 23
  smoke.sweeps.preset_check 22
  smoke.bad_input 19
  faults.results 18
  smoke.scaling_model 18
  smoke.tuner_conf 16
  mpi.presets 16
  unit.progress_script 15
)
# dtune_test_cost(NAME): sets NAME's COST when it is listed (called where the test is added:
# set_tests_properties reaches only the tests of its own directory).
function(dtune_test_cost name)
  list(FIND _dtune_test_costs ${name} _i)
  if(_i GREATER -1)
    math(EXPR _i "${_i} + 1")
    list(GET _dtune_test_costs ${_i} _cost)
    set_tests_properties(${name} PROPERTIES COST ${_cost})
  endif()
endfunction()
