# Each slow test's time on the 2-core machine (seconds, one serial run, 2026-12-02), as ctest's COST:
# with -j, ctest starts the costliest first, so a clean clone (no Testing/Temporary/CTestCostData.txt
# yet) does not leave a two-minute test for the end. Refresh from build/ctest-junit.xml when tests
# change much; tests not listed cost 0 (started after these).
set(_dtune_test_costs
  mpi.pipeline 154
  mpi.pipeline_bubble 60
  smoke.new_user 90
  smoke.sweeps.tune 75
  mpi.train 71
  mpi.shard 200
  smoke.doc_pages 69
  smoke.sweeps 54
  slurm.nodes 51
  bundle.gpu_rehearsal 44
  data.loader 42
  faults.tune_inputs 39
  cluster.nodes 39
  mpi.llama 71
  mpi.mesh 75
  mpi.gpt_tp 24
  faults.sweeps 37
  mpi.comm 37
  mpi.pipeline_mixed 36
  smoke.bad_input 35
  smoke.train_results 33
  faults.report_hostile 27
  faults.comm 25
  faults.train 25
  faults.binary_limits 25
  faults.report_inputs 22
  smoke.model_cli 20
  faults.data 19
  smoke.compare 18
  data.s3_storage 17
  smoke.probe 17
  smoke.report 17
  data.damaged_inputs 16
  slurm.sweeps 16
  slurm.tune 15
  smoke.comm_nccl_tests_json 15
  faults.secrets 15
  smoke.report_verdicts 14
  faults.model_inputs 13
  smoke.sweeps.tune_real 30
  faults.sweep_inputs 11
  faults.results 11
  smoke.train_profile 11
  unit.sweeps.hosts 11
  smoke.sweeps.preset_check 10
  smoke.report_advice 10
  unit.progress_script 8
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
