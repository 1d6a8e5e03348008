mod sim_actors;
